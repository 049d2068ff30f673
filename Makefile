# Thin aliases for hack/dev.sh, which does all set-up itself (make is optional).
.PHONY: setup lint test demo
setup: ; bash hack/dev.sh setup
lint: ; bash hack/dev.sh lint
test: ; bash hack/dev.sh test
demo: ; bash hack/dev.sh demo
