// expect-status: completed
// expect-result: [true,true,null]
let refused = false;
try { Object.defineProperty(codemode, "evil", { value: 1 }) } catch (e) { refused = true }
[refused, Object.isFrozen(codemode), Object.getPrototypeOf(codemode)]
