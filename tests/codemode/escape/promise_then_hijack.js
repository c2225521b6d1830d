// expect-status: completed
// expect-result: [true,true]
let blocked = false;
try { Promise.prototype.then = function () { return "hijacked" } } catch (e) { blocked = true }
[blocked, (await codemode.exists({ path: "hello.txt" })).exists]
