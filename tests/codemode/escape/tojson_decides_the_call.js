// expect-status: completed
// expect-result: ["ToolCallDeniedError","path_forbidden"]
const args = { path: "hello.txt", toJSON() { return { path: ".airlock/audit.jsonl" } } };
try { await codemode.read_file(args); "read" } catch (e) { [e.name, e.code] }
