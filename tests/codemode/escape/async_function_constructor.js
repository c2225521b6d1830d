// expect-status: completed
// expect-result: "TypeError"
const AsyncFunction = Object.getPrototypeOf(async function () {}).constructor;
try { await AsyncFunction("return 1")(); "escaped" } catch (e) { e.name }
