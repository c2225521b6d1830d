// expect-status: completed
// expect-result: [false,false,"TypeError"]
const d = Object.getOwnPropertyDescriptor(Function.prototype, "constructor");
try { d.value("return 1")(); "escaped" } catch (e) { [d.writable, d.configurable, e.name] }
