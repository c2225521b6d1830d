// expect-status: completed
// expect-result: ["invalid_input","read_file: /: unknown property `evil`"]
try { await codemode.read_file({ path: "hello.txt", evil: true }); "read" } catch (e) { [e.code, e.message] }
