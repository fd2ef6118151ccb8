'use strict';
const test = require('node:test');
const assert = require('node:assert');
const { add } = require('./math.js');

test('adds', () => { assert.strictEqual(add(1, 2), 3); });
test('adds wrong', () => { assert.strictEqual(add(2, 2), 5); });
test('skipped', { skip: 'planted' }, () => {});
test('adds negatives', () => { assert.strictEqual(add(-1, -1), -2); });
