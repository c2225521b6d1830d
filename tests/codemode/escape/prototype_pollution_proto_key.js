// expect-status: completed
// expect-result: true
const o = JSON.parse('{"__proto__": {"polluted": true}}');
try { Object.assign({}, o); ({}).__proto__.polluted = 1 } catch (e) {}
({}).polluted === undefined
