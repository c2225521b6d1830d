// expect-code: script_timeout
const again = () => queueMicrotask(again);
again();
await new Promise(() => {});
