// expect-code: script_memory
function again() { return Promise.resolve().then(again) }
again();
await new Promise(() => {});
