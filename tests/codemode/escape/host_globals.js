// expect-status: completed
// expect-result: []
const standard = new Set(Object.getOwnPropertyNames(globalThis));
["host", "__host", "hostCall", "settle", "invoke", "waiting"].filter((n) => standard.has(n))
