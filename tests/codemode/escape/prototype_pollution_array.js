// expect-status: completed
// expect-result: [true,[2,4]]
let blocked = false;
try { Array.prototype.map = function () { return "hijacked" } } catch (e) { blocked = e instanceof TypeError }
[blocked, [1, 2].map((x) => x * 2)]
