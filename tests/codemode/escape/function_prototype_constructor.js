// expect-status: completed
// expect-result: "TypeError"
try { (function () {}).constructor("return 1")(); "escaped" } catch (e) { e.name }
