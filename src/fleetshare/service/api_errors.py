"""The API's refusals and how each is answered (part of :mod:`fleetshare.service.api`): a
:class:`~fleetshare.service.plane.ServiceError` with its status (a 422 shaped as FastAPI's own),
a submission's problems, a policy's bad fields, node pools' bad fields, and 401 without a valid
token."""

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from fleetshare.service import api_nodes
from fleetshare.service.plane import PoolProblems, ServiceError
from fleetshare.service.submission import SubmissionError


class Unauthorized(Exception):
    """No valid bearer token: 401."""


class TooMany(ServiceError):
    """Another what-if runs, or too many event streams are open."""

    status = 429


class PolicyProblems(Exception):
    """A refused policy or team: 422 naming each ``(path, why)``."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__(problems)
        self.problems = problems


def service_error_response(exc: ServiceError) -> JSONResponse:
    if exc.status == 422:  # shaped as FastAPI's (the spec's HTTPValidationError)
        loc = ["body"] if exc.field is None else ["body", exc.field]
        detail = [{"loc": loc, "msg": exc.message, "type": "value_error"}]
        return JSONResponse({"detail": detail}, status_code=422)
    return JSONResponse({"detail": exc.message}, status_code=exc.status)


def submission_error_response(exc: SubmissionError) -> JSONResponse:
    if exc.status != 422:
        return JSONResponse({"detail": exc.problems[0][1]}, status_code=exc.status)
    detail = [{"loc": loc, "msg": msg, "type": "submission"} for loc, msg in exc.problems]
    return JSONResponse({"detail": detail}, status_code=422)


def install_handlers(app: FastAPI) -> None:
    """Answer each refusal above as the module docstring says."""

    @app.exception_handler(ServiceError)
    async def _service_error(_: Request, exc: ServiceError) -> JSONResponse:
        return service_error_response(exc)

    @app.exception_handler(Unauthorized)
    async def _unauthorized(_: Request, exc: Unauthorized) -> JSONResponse:
        return JSONResponse(
            {"detail": "missing or invalid bearer token"},
            status_code=401,
            headers={"WWW-Authenticate": "Bearer"},
        )

    @app.exception_handler(SubmissionError)
    async def _submission_error(_: Request, exc: SubmissionError) -> JSONResponse:
        return submission_error_response(exc)

    app.add_exception_handler(PoolProblems, api_nodes.pool_problems)

    @app.exception_handler(PolicyProblems)
    async def _policy_problems(_: Request, exc: PolicyProblems) -> JSONResponse:
        detail = [
            {"loc": ["body", "policy", *([path] if path else [])], "msg": why, "type": "policy"}
            for path, why in exc.problems
        ]
        return JSONResponse({"detail": detail}, status_code=422)
