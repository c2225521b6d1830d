// expect-code: script_limit
"x".repeat(2 * 1024 * 1024)
