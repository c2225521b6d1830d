// expect-code: script_limit
for (let i = 0; ; i++) await codemode.exists({ path: "hello.txt" });
