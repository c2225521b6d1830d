// expect-status: completed
// expect-result: "TypeError"
try { await codemode.read_file({ path: "hello.txt", max_bytes: 10n }); "read" } catch (e) { e.name }
