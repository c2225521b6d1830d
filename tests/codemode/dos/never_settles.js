// expect-code: script_error
await new Promise(() => {});
