// expect-status: completed
// expect-result: ["ToolCallDeniedError","path_forbidden"]
try { await codemode.read_file({ path: ".airlock/audit.jsonl" }); "read" } catch (e) { [e.name, e.code] }
