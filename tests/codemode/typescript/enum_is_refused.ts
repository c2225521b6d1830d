// expect-status: error
// expect-code: parse_error
// expect-line: 6
// expect-column: 1
const mode: string = "a";
enum Mode { A, B }
