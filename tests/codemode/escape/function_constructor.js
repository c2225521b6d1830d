// expect-status: completed
// expect-result: "TypeError"
try { Function("return globalThis")(); "escaped" } catch (e) { e.name }
