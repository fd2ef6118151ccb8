module hang

go 1.22
