// expect-status: error
// expect-code: parse_error
// expect-line: 6
// expect-column: 15
const ok: number = 1;
const broken: = 2;
