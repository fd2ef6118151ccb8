import os


def add(a, b):
    return a + b


def broken():
    return undefined_name
