// expect-code: script_timeout
/^(a+)+$/.test("a".repeat(64) + "b")
