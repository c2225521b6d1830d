// expect-status: completed
// expect-result: "TypeError"
const AG = Object.getPrototypeOf(async function* () {}).constructor;
try { AG("yield 1")(); "escaped" } catch (e) { e.name }
