// expect-status: completed
// expect-result: [true,true]
try { Object.prototype.polluted = 1 } catch (e) {}
[({}).polluted === undefined, Object.isFrozen(Object.prototype)]
