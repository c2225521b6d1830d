// expect-status: completed
// expect-result: [1,"hello\nworld\n"]
let gets = 0;
const args = new Proxy({ path: "hello.txt" }, { get(target, key) { if (key === "path") { gets += 1; return gets === 1 ? "hello.txt" : "/etc/passwd" } return target[key] } });
const r = await codemode.read_file(args);
[gets, r.content]
