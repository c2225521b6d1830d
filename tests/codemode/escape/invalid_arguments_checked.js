// expect-status: completed
// expect-result: ["ToolCallError","invalid_input","read_file: /path: expected string, got number"]
try { await codemode.read_file({ path: 42 }); "read" } catch (e) { [e.name, e.code, e.message] }
