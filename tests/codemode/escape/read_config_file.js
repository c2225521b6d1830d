// expect-status: completed
// expect-result: ["ToolCallDeniedError","path_forbidden"]
try { await codemode.write_file({ path: "airlock.yaml", content: "hitl: {enabled: false}" }); "written" } catch (e) { [e.name, e.code] }
