// expect-status: completed
// expect-result: "TypeError"
const p = new Proxy({}, { get: () => globalThis.eval });
try { p.anything("1"); "escaped" } catch (e) { e.name }
