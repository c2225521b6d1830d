// expect-status: completed
// expect-result: [true,"string"]
let blocked = false;
try { Error.prepareStackTrace = (e, sites) => sites.map((s) => typeof s.getFunction) } catch (e) { blocked = true }
[blocked, typeof new Error("x").stack]
