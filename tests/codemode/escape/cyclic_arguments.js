// expect-status: completed
// expect-result: "TypeError"
const a = { path: "hello.txt" }; a.self = a;
try { await codemode.read_file(a); "read" } catch (e) { e.name }
