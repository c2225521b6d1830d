// expect-status: completed
// expect-result: "TypeError"
try { new Function("return 1"); "escaped" } catch (e) { e.name }
