// expect-status: completed
// expect-result: "done"
// expect-logs-truncated: true
for (let i = 0; i < 100000; i++) console.log("x".repeat(100));
"done"
