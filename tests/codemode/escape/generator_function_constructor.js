// expect-status: completed
// expect-result: "TypeError"
const G = Object.getPrototypeOf(function* () {}).constructor;
try { G("yield 1")().next(); "escaped" } catch (e) { e.name }
