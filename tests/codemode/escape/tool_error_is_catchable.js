// expect-status: completed
// expect-result: ["ToolCallError","not_found"]
try { await codemode.read_file({ path: "missing.txt" }); "read" } catch (e) { [e.name, e.code] }
