'use strict';
const sum = require('./sum');

test('adds', () => { expect(sum(1, 2)).toBe(3); });
test('adds wrong', () => { expect(sum(2, 2)).toBe(5); });
test.skip('skipped', () => {});
test('adds negatives', () => { expect(sum(-1, -1)).toBe(-2); });
