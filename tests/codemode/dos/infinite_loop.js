// expect-code: script_timeout
for (;;) {}
