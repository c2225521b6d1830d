// expect-code: script_limit
function down(n) { return down(n + 1) + 1 }
down(0)
