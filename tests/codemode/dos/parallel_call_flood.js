// expect-code: script_limit
await Promise.all(Array.from({ length: 100 }, () => codemode.exists({ path: "hello.txt" })));
