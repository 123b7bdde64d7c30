FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 GPUPOOL_VAR_DIR=/var/lib/gpupool
WORKDIR /app
COPY pyproject.toml README.md ./
COPY core ./core
COPY pool ./pool
COPY inventory ./inventory
COPY allocation ./allocation
COPY history ./history
COPY agents ./agents
COPY frontend ./frontend
COPY cli ./cli
COPY manage.py ./
COPY examples ./examples
RUN pip install --no-cache-dir ./cli . && mkdir -p /var/lib/gpupool
EXPOSE 8000
CMD ["gunicorn", "-c", "python:pool.gunicorn_conf", "pool.asgi:application", "-k", "uvicorn_worker.UvicornWorker", "--bind", "0.0.0.0:8000"]
