// expect-status: completed
// expect-result: "TypeError"
const name = ["delete", "file"].join("_");
try { await codemode[name]({ path: "hello.txt" }); "deleted" } catch (e) { e.name }
