# The service image: `chatbot serve` by default, any other `chatbot` command as a one-shot:
#   docker run --rm -e CHATBOT_DATABASE_URL=... chatbot-agent migrate
#   docker run --rm -e CHATBOT_DATABASE_URL=... -v "$PWD/kb:/kb:ro" chatbot-agent ingest --tenant acme /kb
# Build:  docker build -t chatbot-agent .   (model extras: --build-arg EXTRAS="[openai]")

FROM python:3.11-slim AS build
ARG EXTRAS=""
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install ".${EXTRAS}"

FROM python:3.11-slim
# A fixed, unprivileged uid: file permissions and pod security policies can name it.
RUN groupadd --system --gid 10001 chatbot \
    && useradd --system --uid 10001 --gid chatbot --home-dir /app --shell /usr/sbin/nologin chatbot
COPY --from=build /opt/venv /opt/venv
COPY --chown=chatbot:chatbot knowledge /app/knowledge
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    CHATBOT_ENVIRONMENT=production \
    CHATBOT_DATA_DIR=/tmp/chatbot
WORKDIR /app
USER chatbot
EXPOSE 8000
# Liveness only (no I/O); readiness (/readyz) is for the load balancer or orchestrator.
HEALTHCHECK --interval=10s --timeout=3s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)"]
ENTRYPOINT ["chatbot"]
# 0.0.0.0 inside the container only; publish the port to the backend's network alone.
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
