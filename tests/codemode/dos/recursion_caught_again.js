// expect-code: script_timeout
function f() { try { f() } catch (e) { f() } }
f()
