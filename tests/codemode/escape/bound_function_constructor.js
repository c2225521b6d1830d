// expect-status: completed
// expect-result: "TypeError"
try { Function.prototype.bind.call(Function, null, "return 1")()(); "escaped" } catch (e) { e.name }
