// expect-status: completed
// expect-result: "TypeError"
function f() { return arguments.callee }
try { f(); "leaked" } catch (e) { e.name }
