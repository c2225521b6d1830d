// expect-status: error
// expect-code: parse_error
// expect-line: 5
// expect-column: 1
namespace Util { export const x = 1 }
