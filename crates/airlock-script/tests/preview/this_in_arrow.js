const g = (() => this)();
g["code" + "mode"].write_file({ path: "x", content: "y" });
class A { f() { return this } x = this; }
function h() { return this }
