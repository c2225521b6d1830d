// expect-status: error
// expect-code: parse_error
// expect-line: 6
// expect-column: 15
class Point {
  constructor(private x: number) {}
}
