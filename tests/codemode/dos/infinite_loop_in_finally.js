// expect-code: script_timeout
for (;;) {
  try { while (true) {} } finally { continue }
}
