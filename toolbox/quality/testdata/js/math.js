'use strict';
function add(a, b) {
  return a + b;
}
function unused() {
  return 1;
}
module.exports = { add, total: () => missing };
