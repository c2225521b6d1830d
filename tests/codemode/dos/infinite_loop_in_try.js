// expect-code: script_timeout
for (;;) {
  try { for (;;) {} } catch (e) {}
}
