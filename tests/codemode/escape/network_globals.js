// expect-status: completed
// expect-result: ["undefined","undefined","undefined","undefined"]
[typeof fetch, typeof XMLHttpRequest, typeof WebSocket, typeof navigator]
