// expect-status: completed
// expect-result: "TypeError"
class A {}
try { A.constructor("return 1")(); "escaped" } catch (e) { e.name }
