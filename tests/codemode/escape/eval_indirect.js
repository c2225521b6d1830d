// expect-status: completed
// expect-result: "TypeError"
try { (0, globalThis["ev" + "al"])("1"); "escaped" } catch (e) { e.name }
