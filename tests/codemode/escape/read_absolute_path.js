// expect-status: completed
// expect-result: ["ToolCallDeniedError","path_forbidden"]
try { await codemode.read_file({ path: "/etc/passwd" }); "read" } catch (e) { [e.name, e.code] }
