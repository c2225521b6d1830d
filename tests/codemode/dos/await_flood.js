// expect-code: script_timeout
for (;;) await null;
