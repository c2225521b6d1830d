// expect-status: completed
// expect-result: true
try { Object.prototype.then = (resolve) => resolve("hijacked") } catch (e) {}
(await codemode.exists({ path: "hello.txt" })).exists
