# Convenience wrappers; ./dev does the work (and needs nothing but bash and python3).
.PHONY: run test lint bench setup
run:
	./dev run
test:
	./dev test
bench:
	./dev bench
setup:
	./dev setup
lint:
	./dev lint
