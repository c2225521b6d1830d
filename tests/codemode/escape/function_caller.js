// expect-status: completed
// expect-result: "TypeError"
function f() { return f.caller }
try { f(); "leaked" } catch (e) { e.name }
